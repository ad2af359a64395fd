"""Small models for the bundled digits data (8x8 grey images, 10 classes)."""
import keras
from keras import layers


def _logits(x, num_classes):
    # Logits in float32 whatever the mixed-precision policy: softmax and loss in fp16
    # lose too much precision.
    x = layers.Dense(num_classes, name="logits_dense")(x)
    return layers.Activation("linear", dtype="float32", name="logits")(x)


def digits_cnn(input_shape=(8, 8, 1), num_classes=10, width=32, **_unused):
    """Two conv layers and a dense head: about 0.97-0.99 test accuracy on digits."""
    inputs = keras.Input(shape=input_shape, name="image")
    x = layers.Conv2D(width, 3, padding="same", activation="relu", name="conv1")(inputs)
    x = layers.Conv2D(2 * width, 3, padding="same", activation="relu", name="conv2")(x)
    x = layers.MaxPooling2D(2, name="pool")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(4 * width, activation="relu", name="dense")(x)
    return keras.Model(inputs, _logits(x, num_classes), name="digits_cnn")


def digits_mlp(input_shape=(8, 8, 1), num_classes=10, width=128, **_unused):
    inputs = keras.Input(shape=input_shape, name="image")
    x = layers.Flatten(name="flatten")(inputs)
    x = layers.Dense(width, activation="relu", name="dense1")(x)
    x = layers.Dense(width, activation="relu", name="dense2")(x)
    return keras.Model(inputs, _logits(x, num_classes), name="digits_mlp")
