"""TensorBoard scalars, written with TensorFlow's own summary op.

tf.summary.scalar lives in the tensorboard package, which training hosts need not
have; tf.summary.write with the scalars plugin's metadata writes the same event
records, and any TensorBoard reads them (`tensorboard --logdir RUN_DIR/tb`).

Sixteen eager writes cost ~11 ms on a CPU; one compiled function per set of tags,
taking the values as one vector and a mask for the ones not measured (None), costs
~1 ms and is traced once, at start-up, outside any measured interval.

A refused write (a full disk) comes from TF as a many-line OpError; it is raised here
as an OSError naming the events file, like every other file write of the observer.
"""
import errno
import re

# The line of TF's message that matters: "<events file>; No space left on device".
_FAILED_FILE = re.compile(r"^(\S+); ([^\t\n]+)$", re.M)


def _as_os_error(err, logdir: str) -> OSError:
    message = getattr(err, "message", str(err))
    found = _FAILED_FILE.search(message)
    path, reason = found.groups() if found else (logdir, message.strip().splitlines()[0])
    return OSError(errno.EIO, reason.strip(), path)


class ScalarWriter:
    def __init__(self, logdir: str, tag_sets=()):
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2
        self._tf = tf
        self._logdir = logdir
        try:
            self._writer = tf.summary.create_file_writer(logdir, flush_millis=10_000)
        except tf.errors.OpError as err:
            raise _as_os_error(err, logdir) from None
        self._metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR)
        self._fns = {}
        for tags in tag_sets:  # trace now; writes nothing (every value masked)
            self.write(0, dict.fromkeys(tags))

    def write(self, step: int, scalars: dict):
        """scalars: {tag: number or None}; None (not measured) is left out."""
        tf = self._tf
        tags = tuple(sorted(scalars))
        if tags not in self._fns:
            self._fns[tags] = self._compile(tags)
        values = [scalars[t] for t in tags]
        try:
            self._fns[tags](tf.constant(step, tf.int64),
                            tf.constant([0.0 if v is None else float(v) for v in values], tf.float32),
                            tf.constant([v is not None for v in values]))
        except tf.errors.OpError as err:
            raise _as_os_error(err, self._logdir) from None

    def _compile(self, tags):
        tf, writer, metadata = self._tf, self._writer, self._metadata

        @tf.function
        def write_all(step, values, present):
            with writer.as_default(step=step):
                for i, tag in enumerate(tags):
                    tf.cond(present[i],
                            lambda i=i, tag=tag: tf.summary.write(tag, values[i], metadata=metadata),
                            lambda: tf.constant(False))
        return write_all

    def close(self):
        try:
            self._writer.flush()
            self._writer.close()
        except self._tf.errors.OpError as err:
            raise _as_os_error(err, self._logdir) from None
