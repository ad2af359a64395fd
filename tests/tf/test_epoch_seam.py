"""Epochs joined into one stream (pipeline.across_epochs): order kept, the seam's
buffer bounded in batches and bytes, and record pipelines keep a static batch size."""
import numpy as np
import tensorflow as tf

from horovod_train.data import pipeline



def _epoch(start, count=3):
    return tf.data.Dataset.range(start, start + count)


def test_epochs_come_out_in_order_with_nothing_lost_or_repeated():
    joined = pipeline.across_epochs([_epoch(0), _epoch(10), _epoch(20)])
    assert [int(v) for v in joined] == [0, 1, 2, 10, 11, 12, 20, 21, 22]


def test_the_seam_buffer_is_bounded_in_batches_and_in_bytes():
    small = (tf.TensorSpec([32, 8, 8, 1], tf.float32), tf.TensorSpec([32], tf.int32))
    assert pipeline.seam_buffer(small) == pipeline.SEAM_BATCHES
    imagenet = (tf.TensorSpec([256, 224, 224, 3], tf.float32), tf.TensorSpec([256], tf.int32))
    assert pipeline.seam_buffer(imagenet) == 1  # 154 MB a batch: over SEAM_BYTES alone
    medium = (tf.TensorSpec([64, 64, 64, 3], tf.float32),)  # 3 MiB: 64 MiB holds 21
    assert pipeline.seam_buffer(medium) == min(pipeline.SEAM_BATCHES, 21)
    unknown = (tf.TensorSpec([None, 8], tf.float32),)
    assert pipeline.seam_buffer(unknown) == 1


def test_batch_decoded_records_keep_their_static_batch_size(tmp_path):
    from horovod_train import config as cfg
    from horovod_train import data
    from horovod_train.data import convert, sharding, sources
    digits = sources.load_digits(None)
    npz = tmp_path / "digits.npz"
    np.savez(npz, x_train=digits.x_train, y_train=digits.y_train, x_test=digits.x_test,
             y_test=digits.y_test)
    convert.convert(convert.ConvertOptions(str(npz), str(tmp_path / "tfr"), num_shards=2,
                                           progress=False))
    source = data.load(cfg.DataConfig(dataset="tfrecord", data_dir=str(tmp_path / "tfr")))
    ds = source.train_dataset(sharding.ShardInfo(0, 1), 32, seed=0, epoch=0)
    x_spec, y_spec = ds.element_spec
    assert x_spec.shape.as_list() == [32, 8, 8, 1] and y_spec.shape.as_list() == [32]
