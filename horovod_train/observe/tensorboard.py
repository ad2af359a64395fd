"""TensorBoard scalars, written with TensorFlow's own summary op.

tf.summary.scalar lives in the tensorboard package, which training hosts need not
have; tf.summary.write with the scalars plugin's metadata writes the same event
records, and any TensorBoard reads them (`tensorboard --logdir RUN_DIR/tb`).

Sixteen eager writes cost ~11 ms on a CPU; one compiled function per set of tags,
taking the values as one vector and a mask for the ones not measured (None), costs
~1 ms and is traced once, at start-up, outside any measured interval.
"""


class ScalarWriter:
    def __init__(self, logdir: str, tag_sets=()):
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2
        self._tf = tf
        self._writer = tf.summary.create_file_writer(logdir, flush_millis=10_000)
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
        self._fns[tags](tf.constant(step, tf.int64),
                        tf.constant([0.0 if v is None else float(v) for v in values], tf.float32),
                        tf.constant([v is not None for v in values]))

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
        self._writer.flush()
        self._writer.close()
