"""The one XLA split: compute and update compiled, the collectives between them not.

Every engine's step is the same three parts (horovod_train.update): the gradients
(forward, backward, micro-batch accumulation), the reduction over ranks, the update
(unscale, finite check, apply or skip, loss scale). With XLA on, the first and the last
are must-compile functions and the reduction sits between them in an outer function
that XLA never compiles: TF 2.21's XLA refuses collectives on CPU ("Collectives are not
yet implemented for CPU devices when compiling with XLA"), and Horovod's ops have XLA
kernels only in GPU builds that enable them. XlaSplit holds the two compiled parts;
what runs between them is the caller's (the CLI's stop-vote reduction, the drop-in's
accumulation and first-update broadcast). xla_collectives() checks a step's graph for
exactly that rule: no collective inside an XLA-compiled function.

Used by step.TrainStep (both of its compiled forms) and keras/jit.SplitTrainStep (the
drop-in's model.fit with jit_compile). Not by the GradientTape API: a tape loop's own
tf.function(jit_compile=True) around DistributedGradientTape.gradient fails in
TensorFlow's compiler (HorovodAllreduce has no XLA kernel), as Horovod's own tape does.
"""
import tensorflow as tf

# The attribute TF puts on a tf.function(jit_compile=True) and on the node calling it.
XLA_MUST_COMPILE = "_XlaMustCompile"


class XlaSplit:
    """compute(*args) -> (outputs, gradients) and update(gradients, variables): two
    tf.functions, must-compile when `jit_compile`. One function object per part, shared
    by every caller, so each compiles once per input signature. The update is traced
    once per list of variables (a Keras train step may apply to any list)."""

    def __init__(self, compute, update, jit_compile: bool, autograph: bool = True,
                 **compute_options):
        self.jit_compile, self.autograph = bool(jit_compile), autograph
        self.compute = tf.function(compute, jit_compile=self.jit_compile, autograph=autograph,
                                   **compute_options)
        self._update = update
        self.updates = {}  # ids of the variables -> their compiled update

    def update(self, grads, variables, *extra):
        """`extra`: more inputs of the update (the agreed verdict of a sharded state)."""
        key = tuple(id(v) for v in variables)
        if key not in self.updates:
            self.updates[key] = tf.function(lambda g, *e: self._update(g, variables, *e),
                                            jit_compile=self.jit_compile,
                                            autograph=self.autograph)
        return self.updates[key](grads, *extra)

    def tracing_count(self) -> int:
        """Traces of both parts so far (a nested call shares its function's cache)."""
        return self.compute.experimental_get_tracing_count() + sum(
            f.experimental_get_tracing_count() for f in self.updates.values())


def _called_functions(node) -> list[str]:
    """Library functions a node runs: a call's f, a loop's cond/body, a cond's branches."""
    names = []
    for value in node.attr.values():
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(f.name for f in value.list.func)
    return names


def _must_compile(attrs) -> bool:
    return XLA_MUST_COMPILE in attrs and attrs[XLA_MUST_COMPILE].b


def xla_functions(graph_def) -> set[str]:
    """Library functions XLA compiles: those marked must-compile (or called by a node
    so marked) and everything they call, through loops, conds and nested calls."""
    library = {f.signature.name: f for f in graph_def.library.function}
    nodes = list(graph_def.node) + [n for f in library.values() for n in f.node_def]
    pending = [name for name, f in library.items() if _must_compile(f.attr)]
    pending += [name for n in nodes if _must_compile(n.attr) for name in _called_functions(n)]
    compiled = set()
    while pending:
        name = pending.pop()
        if name in compiled or name not in library:
            continue
        compiled.add(name)
        pending.extend(c for n in library[name].node_def for c in _called_functions(n))
    return compiled


def xla_collectives(graph_def, op_types) -> tuple[int, int]:
    """(collective ops outside XLA, collective ops inside XLA-compiled functions)."""
    compiled = xla_functions(graph_def)
    outside = sum(n.op in op_types for n in graph_def.node)
    inside = 0
    for function in graph_def.library.function:
        count = sum(n.op in op_types for n in function.node_def)
        if function.signature.name in compiled:
            inside += count
        else:
            outside += count
    return outside, inside
