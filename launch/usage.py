"""How every tool of the project reads its command line and says what is wrong. Stdlib only.

The trainer, `plan`, `data`, `report` and `launch` all end bad input the same way: one
line, `PROG: error: WHAT: received X; expected Y. Fix: Z`, exit code 2. A mistyped flag,
subcommand or choice value gets "did you mean" from difflib. launch/ may not import
horovod_train, so this lives here and horovod_train imports it (as it does launch/argv.py).
"""
import argparse
import difflib
import re
import sys

_CHOICE = re.compile(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)$")
_REQUIRED = re.compile(r"the following arguments are required: (.*)$")
_BAD_VALUE = re.compile(r"argument (\S+): invalid (\w+) value: '(.*)'$")
_NOT_WITH = re.compile(r"argument (\S+): not allowed with argument (\S+)$")
_ARGUMENT = re.compile(r"argument (\S+): (.*)$")


def close_matches(word, choices) -> list[str]:
    """The choices a mistyped `word` most likely meant, best first (at most three): those
    it begins (an abbreviation: --num for --num_shards), then difflib's closest."""
    word, choices = str(word), [str(c) for c in choices]
    begun = [c for c in choices if c.startswith(word) and len(word) > 2]
    close = difflib.get_close_matches(word, choices, n=3, cutoff=0.6)
    return list(dict.fromkeys(begun + close))[:3]


def did_you_mean(word, choices, spell=str) -> str:
    """`did you mean X? Else ` (or `X or Y?`), `spell` turning each match into what to type;
    "" when nothing is close."""
    close = close_matches(word, choices)
    return f"did you mean {' or '.join(spell(c) for c in close)}? Else " if close else ""


def error_line(prog: str, err) -> str:
    """The one line every tool prints for bad input (newlines folded: one line always)."""
    return f"{prog}: error: " + str(err).replace("\n", " ")


class Parser(argparse.ArgumentParser):
    """argparse, speaking the project's error format. Subclasses set `error_type` (the
    tool's UsageError or LaunchError); errors are raised, never printed with usage text.
    No abbreviations: the trainer's absl flags take none, so no tool does."""
    error_type: type = ValueError

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def fail(self, what: str, received: str | None, expected: str, fix: str):
        got = "not given" if received is None else f"received {received}"
        return self.error_type(f"{what}: {got}; expected {expected}. Fix: {fix}")

    def _help_fix(self) -> str:
        return f"see `{self.prog} --help`"

    def _subcommands(self) -> dict:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001 - argparse's type
                return action.choices
        return {}

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        self._refuse_unknown_flags(args)
        return super().parse_known_args(args, namespace)

    def _refuse_unknown_flags(self, args: list[str]) -> None:
        """A mistyped --flag, found before argparse would report a missing required one
        instead; a subcommand's parser checks the flags after its name itself."""
        subcommands = self._subcommands()
        for arg in args:
            if arg == "--" or arg in subcommands:
                return
            name = arg.partition("=")[0]
            if arg.startswith("--") and name not in self._option_string_actions:
                raise self.fail(name, "an unknown flag", f"a flag that `{self.prog} --help` lists",
                                did_you_mean(name, self._option_string_actions) + self._help_fix())

    def error(self, message):
        raise self._translate(message)

    def _translate(self, message: str):
        choice = _CHOICE.match(message)
        if choice:
            what, got = choice.group(1), choice.group(2)
            listed = [c.strip().strip("'") for c in choice.group(3).split(",")]
            if set(listed) == set(self._subcommands()):
                what = "subcommand"
            spell = str if what == "subcommand" else (lambda c: f"{what} {c}")
            return self.fail(what, repr(got), "one of: " + ", ".join(listed),
                             did_you_mean(got, listed, spell) + self._help_fix())
        required = _REQUIRED.match(message)
        if required:
            return self.fail(required.group(1), None, "it on the command line",
                             f"add {required.group(1)}; {self._help_fix()}")
        both = _NOT_WITH.match(message)
        if both:
            pair = f"{both.group(1)} with {both.group(2)}"
            return self.fail(both.group(1), pair, "one of them, not both",
                             f"drop {both.group(1)} or {both.group(2)}")
        bad = _BAD_VALUE.match(message)
        if bad:
            return self.fail(bad.group(1), repr(bad.group(3)), f"a value of type {bad.group(2)}",
                             self._help_fix())
        argument = _ARGUMENT.match(message)
        if argument and "; expected" in argument.group(2):  # a type's own received/expected
            detail = argument.group(2)
            fix = "" if "Fix:" in detail else f". Fix: {self._help_fix()}"
            return self.error_type(f"{argument.group(1)}: {detail}{fix}")
        what, detail = argument.groups() if argument else (self.prog, message)
        return self.error_type(f"{what}: {detail}; expected what `{self.prog} --help` shows. "
                               f"Fix: {self._help_fix()}")
