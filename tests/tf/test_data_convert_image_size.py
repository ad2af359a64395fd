"""Issue 55 item 9: `python -m horovod_train.data convert --input=classes --output_dir=o
--image_size=8` ended in `IndexError: tuple index out of range`. One size means a square;
H,W keeps its meaning. Run through the command's main(), as the user's command runs it."""
import json
import os

import pytest

from helpers import image_classes
from horovod_train.data.__main__ import main


@pytest.fixture
def classes(tmp_path, monkeypatch):
    """A folder of two class folders of 5x4 RGB PNGs, and the test inside its parent."""
    image_classes(str(tmp_path / "classes"), per_class=3)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _converted(out: str) -> tuple[list, tuple]:
    """The schema's shape from dataset.json, and the size of one stored image."""
    import tensorflow as tf
    meta = json.loads(open(os.path.join(out, "dataset.json")).read())
    shard = sorted(f for f in os.listdir(out) if f.startswith("train"))[0]
    record = next(iter(tf.data.TFRecordDataset(os.path.join(out, shard))))
    example = tf.train.Example.FromString(record.numpy())
    image = [v for v in example.features.feature.values() if v.bytes_list.value][0]
    return meta["shape"], tf.io.decode_image(image.bytes_list.value[0]).shape


def test_one_size_is_a_square(classes, capsys):
    assert main(["convert", "--input=classes", "--output_dir=o", "--image_size=8",
                 "--no_progress"]) == 0, capsys.readouterr().err
    shape, image = _converted("o")
    assert shape == [8, 8, 3] and tuple(image) == (8, 8, 3)


def test_height_comma_width_keeps_its_meaning(classes, capsys):
    assert main(["convert", "--input=classes", "--output_dir=o", "--image_size=8,6",
                 "--no_progress"]) == 0, capsys.readouterr().err
    shape, image = _converted("o")
    assert shape == [8, 6, 3] and tuple(image) == (8, 6, 3)
