"""Every command-line flag, defined once, and the one conversion to a RunConfig.

Flags are plain strings/numbers here; choices are validated by the config
dataclasses so that every bad value gets the same received/expected/fix message.
"""
from absl import flags

from horovod_train import config as cfg

_D = cfg.RunConfig()  # defaults come from the dataclasses, not repeated here


def define_flags():
    f = flags
    # Model and data.
    f.DEFINE_string("model", _D.model, "Model name from the zoo (models.available_models()).")
    f.DEFINE_string("dataset", _D.data.dataset, "Dataset: digits (bundled) or synthetic.")
    f.DEFINE_string("data_dir", _D.data.data_dir, "Directory holding the dataset files.")
    f.DEFINE_integer("batch_size", _D.data.batch_size, "Per-replica batch size.")
    f.DEFINE_integer("data_threads", _D.data.data_threads, "tf.data threads; 0 = autotune.")
    # Optimisation.
    f.DEFINE_string("optimizer", _D.optim.optimizer, "adam or sgd.")
    f.DEFINE_float("learning_rate", _D.optim.learning_rate,
                   "Per-replica learning rate; multiplied by the world size (linear scaling).")
    f.DEFINE_float("momentum", _D.optim.momentum, "SGD momentum.")
    f.DEFINE_float("warmup_epochs", _D.optim.warmup_epochs,
                   "Epochs of linear warmup from the per-replica to the scaled rate.")
    f.DEFINE_boolean("scale_lr", _D.optim.scale_lr, "Scale the learning rate by world size.")
    # Schedule.
    f.DEFINE_integer("epochs", _D.train.epochs, "Training epochs.")
    f.DEFINE_integer("max_steps", _D.train.max_steps, "Stop after this many steps; 0 = no cap.")
    f.DEFINE_integer("log_every", _D.train.log_every, "Steps per logging interval.")
    f.DEFINE_integer("eval_every_epochs", _D.train.eval_every_epochs,
                     "Evaluate every N epochs; 0 = only at the end.")
    # Runtime.
    f.DEFINE_string("backend", _D.runtime.backend,
                    "auto, horovod, mwms or local. auto = horovod under horovodrun/mpirun/srun, "
                    "mwms when only TF_CONFIG is set, else local.")
    f.DEFINE_integer("seed", _D.runtime.seed, "Random seed (same on every rank).")
    f.DEFINE_integer("intra_op_threads", _D.runtime.intra_op_threads,
                     "TF intra-op threads per rank; 0 = cores / ranks on this host.")
    f.DEFINE_integer("inter_op_threads", _D.runtime.inter_op_threads,
                     "TF inter-op threads per rank; 0 = automatic.")
    f.DEFINE_boolean("deterministic", _D.runtime.deterministic, "Enable TF op determinism.")
    f.DEFINE_string("summary_json", _D.summary_json,
                    "Write the run summary here (chief only).")
    f.DEFINE_string("export_weights", _D.export_weights,
                    "Write the final model weights here as .npz (chief only).")


def config_from_flags(fv) -> cfg.RunConfig:
    """fv: parsed absl FlagValues. Raises UsageError on bad values."""
    return cfg.RunConfig(
        model=fv.model,
        data=cfg.DataConfig(dataset=fv.dataset, data_dir=fv.data_dir,
                            batch_size=fv.batch_size, data_threads=fv.data_threads),
        optim=cfg.OptimConfig(optimizer=fv.optimizer, learning_rate=fv.learning_rate,
                              momentum=fv.momentum, warmup_epochs=fv.warmup_epochs,
                              scale_lr=fv.scale_lr),
        train=cfg.TrainConfig(epochs=fv.epochs, max_steps=fv.max_steps,
                              log_every=fv.log_every, eval_every_epochs=fv.eval_every_epochs),
        runtime=cfg.RuntimeConfig(backend=fv.backend, seed=fv.seed,
                                  intra_op_threads=fv.intra_op_threads,
                                  inter_op_threads=fv.inter_op_threads,
                                  deterministic=fv.deterministic),
        summary_json=fv.summary_json,
        export_weights=fv.export_weights,
    )
