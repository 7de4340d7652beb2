"""Keras' side of the anchor comparison: model.fit on the benchmarked MLP, with the default
strategy or MirroredStrategy over two logical CPU devices (TensorFlow's way to run two
replicas on one CPU). Prints one JSON line (fashion.report).

    python keras_anchor.py --strategy default|mirrored [--epochs 3] [--steps 234]
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

import fashion  # noqa: E402


class EpochTimer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.seconds = []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self.start)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", choices=["default", "mirrored"], default="default")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=fashion.MAX_STEPS)
    args = parser.parse_args()

    if args.strategy == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    else:
        strategy = tf.distribute.get_strategy()

    x, y = fashion.training_set(args.steps)
    x_test, y_test = fashion.load("test")
    keras.utils.set_random_seed(fashion.SEED)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input(shape=(784,)),
            keras.layers.Dense(1024, activation="relu"),
            keras.layers.Dense(1024, activation="relu"),
            keras.layers.Dense(10),
        ])
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=fashion.LR, momentum=fashion.MOMENTUM),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    timer = EpochTimer()
    model.fit(x, y, batch_size=fashion.BATCH, epochs=args.epochs, shuffle=True, verbose=0, callbacks=[timer])
    _, accuracy = model.evaluate(x_test, y_test, batch_size=1000, verbose=0)
    name = "Keras MirroredStrategy (2 CPU devices)" if args.strategy == "mirrored" else "Keras default strategy"
    fashion.report(name, f"tensorflow-cpu {tf.__version__}, keras {keras.__version__}", len(x), timer.seconds,
                   accuracy, replicas=strategy.num_replicas_in_sync)


if __name__ == "__main__":
    main()
