"""Flag spelling shared by every tool (the trainer, `launch`, `plan`).

Each flag is declared once with underscores (`--fusion_threshold_mb`); users type
dashes as often, so `--fusion-threshold-mb` means the same everywhere. Only the name is
rewritten: values (paths, hostnames, `gpt:layers=2`) pass through untouched.
"""


def normalize_flag_names(argv: list[str]) -> list[str]:
    """`--a-b=c` -> `--a_b=c`, `--a-b` -> `--a_b`; everything after a bare `--`, single-dash
    arguments and values are left as they are."""
    out = []
    for index, arg in enumerate(argv):
        if arg == "--":
            return out + list(argv[index:])
        if arg.startswith("--") and len(arg) > 2:
            name, sep, value = arg[2:].partition("=")
            arg = "--" + name.replace("-", "_") + sep + value
        out.append(arg)
    return out
