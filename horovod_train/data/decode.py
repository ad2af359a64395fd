"""Stored record -> (x, y): the one decoder behind TFRecord and LMDB (and TFDS's dtypes).

Keeping one decoder is what makes the sources interchangeable: the same data
converted to TFRecord, LMDB or TFDS yields the same tensors.
"""
import numpy as np
import tensorflow as tf


def feature_spec(schema) -> dict:
    if schema.kind == "image":
        spec = {"image": tf.io.FixedLenFeature([], tf.string)}
    else:
        spec = {"tokens": tf.io.FixedLenFeature([schema.shape[0]], tf.int64)}
    if schema.task == "classify":
        spec["label"] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def parser(schema):
    """serialized tf.train.Example -> dict of tensors (cheap; decoding comes later)."""
    spec = feature_spec(schema)
    return lambda record: tf.io.parse_single_example(record, spec)


def batch_parser(schema):
    spec = feature_spec(schema)
    return lambda records: tf.io.parse_example(records, spec)


def standardize(x, y):
    """uint8 pixels -> float32 in [0, 1]; integer inputs (tokens) -> int32; labels -> int32."""
    if x.dtype == tf.uint8:
        x = tf.cast(x, tf.float32) / 255.0
    elif x.dtype.is_integer:
        x = tf.cast(x, tf.int32)
    elif x.dtype != tf.float32:
        x = tf.cast(x, tf.float32)
    return x, tf.cast(y, tf.int32)


def _image(features, schema):
    if schema.encoding == "raw":
        x = tf.io.decode_raw(features["image"], tf.dtypes.as_dtype(schema.dtype))
        return tf.reshape(x, schema.shape)
    # Batching needs one static shape; a differently sized image must fail loudly.
    return tf.ensure_shape(_decoded_image(features, schema), schema.shape)


def _decoded_image(features, schema):
    return tf.io.decode_image(features["image"], channels=schema.shape[-1],
                              expand_animations=False)


def decoder(schema):
    """features dict -> (x, y) in their stored dtypes (uint8 pixels, int64 ids).

    The pipeline standardizes after batching: the batch copy then moves uint8 (a
    quarter of float32's bytes), and the cast runs once per batch, vectorized. On
    224x224 JPEGs that is +16-19% images/s; a cache of decoded images is 4x smaller."""
    def decode(features):
        if schema.kind == "image":
            x = _image(features, schema)
        else:
            x = features["tokens"]
        if schema.task == "lm":
            return x[:-1], x[1:]
        return x, features["label"]
    return decode


def batch_decoder(schema):
    """serialized [B] -> (x [B, ...], y [B]) in a few ops per *batch*, or None for encoded
    images (decode_image takes one image at a time). Per-example ops cost microseconds
    each; on small records that overhead, not the bytes, limits the pipeline."""
    if schema.kind == "image" and schema.encoding == "encoded":
        return None
    parse = batch_parser(schema)

    def decode(records):
        features = parse(records)
        if schema.kind == "image":
            x = tf.io.decode_raw(features["image"], tf.dtypes.as_dtype(schema.dtype))
            x = tf.reshape(x, [-1, *schema.shape])
        else:
            x = features["tokens"]
        if schema.task == "lm":
            return standardize(x[:, :-1], x[:, 1:])
        return standardize(x, features["label"])
    return decode


def checker(schema):
    """serialized -> int64 status: 1 usable, -1 not (a label or token out of range, an
    image of the wrong size); a record that does not parse, or an encoded image that
    does not decode, raises. Encoded images are decoded in full, once: that costs about
    an epoch of decoding, but a header or length check lets through the images that
    would otherwise crash step 1 (and --skip_corrupt must know every one of them at
    load, so that all ranks count the same records).

    The status is computed from the parsed values on purpose: a result that did not
    depend on them (a static size, say) would let graph optimisation drop the parse."""
    parse = parser(schema)

    def check(record):
        features = parse(record)
        ok = True
        if schema.kind == "image" and schema.encoding == "encoded":
            ok = tf.reduce_all(tf.equal(tf.shape(_decoded_image(features, schema)),
                                        schema.shape))
        return _status(_values_ok(features, schema, ok))
    return check


def batch_checker(schema):
    """serialized [B] -> status [B]: checker's rules in a few ops per batch (checking
    320,000 small records took 6-10 s one by one, 1.8-2.6 s by batch, about their
    reading time); None for encoded images, which decode one at a time. A record that
    does not parse fails its whole batch."""
    if schema.kind == "image" and schema.encoding == "encoded":
        return None
    parse = batch_parser(schema)
    return lambda records: _status(_values_ok(parse(records), schema))


def _values_ok(features, schema, ok=True):
    """The rules on parsed values, elementwise, so that one record and a batch take the
    same ones: a raw image's byte count, tokens' and labels' ranges."""
    if schema.kind == "image" and schema.encoding == "raw":
        size = int(np.prod(schema.shape)) * tf.dtypes.as_dtype(schema.dtype).size
        ok = tf.equal(tf.strings.length(features["image"]), size)
    elif schema.kind == "tokens":
        tokens = features["tokens"]
        ok = tf.reduce_all(tokens >= 0, axis=-1)
        if schema.task == "lm":
            ok = ok & tf.reduce_all(tokens < schema.num_classes, axis=-1)
    if schema.task == "classify":
        ok = ok & (features["label"] >= 0) & (features["label"] < schema.num_classes)
    return ok


def _status(ok):
    return tf.where(ok, tf.constant(1, tf.int64), tf.constant(-1, tf.int64))
