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
    f.DEFINE_string("dataset", _D.data.dataset,
                    "Dataset: digits (bundled), synthetic, tfrecord, lmdb or tfds.")
    f.DEFINE_string("data_dir", _D.data.data_dir,
                    "Directory holding the dataset files (TFDS: its data_dir).")
    f.DEFINE_integer("batch_size", _D.data.batch_size, "Per-replica batch size.")
    f.DEFINE_integer("data_threads", _D.data.data_threads, "tf.data threads; 0 = autotune.")
    f.DEFINE_string("tfds_name", _D.data.tfds_name, "TFDS builder name for --dataset=tfds.")
    f.DEFINE_string("train_split", _D.data.train_split, "Training split (TFDS: slices allowed).")
    f.DEFINE_string("eval_split", _D.data.eval_split, "Evaluation split.")
    f.DEFINE_integer("shuffle_buffer", _D.data.shuffle_buffer,
                     "Shuffle buffer per worker in examples; 0 = automatic.")
    f.DEFINE_string("cache", _D.data.cache,
                    "Cache decoded examples: '' (off), 'memory', or a file prefix.")
    f.DEFINE_boolean("skip_corrupt", _D.data.skip_corrupt,
                     "Skip unreadable records (counted and logged) instead of failing.")
    f.DEFINE_boolean("verify_data", _D.data.verify_data,
                     "Read every record once at start so corruption fails before training.")
    f.DEFINE_list("synthetic_shape", list(map(str, _D.data.synthetic_shape)),
                  "Shape of one synthetic example, e.g. 224,224,3.")
    f.DEFINE_integer("synthetic_examples", _D.data.synthetic_examples,
                     "Number of synthetic examples (an eighth held out for eval).")
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
    f.DEFINE_boolean("eval_at_start", _D.train.eval_at_start,
                     "Also evaluate before the first step (the starting loss).")
    # Checkpoints.
    f.DEFINE_string("checkpoint_dir", _D.train.checkpoint_dir,
                    "Write checkpoints here (chief only) and resume from the newest one.")
    f.DEFINE_string("checkpoint_every", _D.train.checkpoint_every,
                    "Checkpoint cadence: N steps, or Ne epochs (e.g. 500 or 1e).")
    f.DEFINE_integer("keep_checkpoints", _D.train.keep_checkpoints, "Newest checkpoints kept.")
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
    # Speed levers.
    f.DEFINE_string("precision", _D.speed.precision, "fp32, mixed_float16 or mixed_bfloat16.")
    f.DEFINE_integer("grad_accum_steps", _D.speed.grad_accum_steps,
                     "Micro-batches of --batch_size per optimizer step (one allreduce per step).")
    f.DEFINE_boolean("gradient_checkpointing", _D.speed.gradient_checkpointing,
                     "Recompute each model block's activations in the backward pass.")
    f.DEFINE_string("compression", _D.speed.compression,
                    "Gradients on the wire: none, fp16 or bf16.")
    f.DEFINE_string("jit_compile", _D.speed.jit_compile,
                    "auto, true or false: XLA-compile the forward/backward pass and the "
                    "optimizer update (never the collectives). auto = on with a GPU, off on CPU.")
    f.DEFINE_integer("max_nonfinite_steps", _D.speed.max_nonfinite_steps,
                     "Stop after this many consecutive steps with non-finite gradients.")
    f.DEFINE_string("inject_nonfinite", _D.speed.inject_nonfinite,
                    "Fault injection: STEP@RANK makes that rank's gradients inf at that step.")
    f.DEFINE_float("fusion_threshold_mb", _D.runtime.fusion_threshold_mb,
                   "horovod: tensor fusion buffer (HOROVOD_FUSION_THRESHOLD); 0 = default.")
    f.DEFINE_float("cycle_time_ms", _D.runtime.cycle_time_ms,
                   "horovod: background cycle (HOROVOD_CYCLE_TIME); 0 = default.")
    f.DEFINE_boolean("hierarchical_allreduce", _D.runtime.hierarchical_allreduce,
                     "horovod: HOROVOD_HIERARCHICAL_ALLREDUCE (intra-node, then across nodes).")
    f.DEFINE_string("collective", _D.runtime.collective,
                    "mwms collectives: auto, ring (gRPC, CPUs) or nccl (GPUs).")
    f.DEFINE_float("collective_timeout_s", _D.runtime.collective_timeout_s,
                   "Seconds a rank waits for its peers (a step, an evaluation, the chief's "
                   "checkpoint write) before it ends the run instead of hanging (exit 75).")
    f.DEFINE_float("stop_grace_s", _D.runtime.stop_grace_s,
                   "On SIGTERM every rank stops at the next step boundary and the chief writes a "
                   "checkpoint (exit 143); after this many seconds without one, the rank ends anyway.")
    f.DEFINE_boolean("elastic", _D.runtime.elastic,
                     "horovod: elastic training under horovodrun --min-np/--max-np "
                     "--host-discovery-script; ranks may leave and join.")
    f.DEFINE_integer("elastic_commit_every", _D.runtime.elastic_commit_every,
                     "Steps between elastic commits; at most this many are redone on a loss.")
    f.DEFINE_integer("mwms_port_base", _D.runtime.mwms_port_base,
                     "mwms: worker ports when TF_CONFIG is derived (base + local rank).")
    f.DEFINE_string("summary_json", _D.summary_json,
                    "Write the run summary here (chief only).")
    f.DEFINE_string("export_weights", _D.export_weights,
                    "Write the final model weights here as .npz (chief only).")
    # Observability (docs/observability.md).
    o = _D.observe
    f.DEFINE_string("run_dir", o.run_dir, "Chief writes metrics.jsonl, tb/ (TensorBoard), "
                    "profile/, timeline.json and summary.json here.")
    f.DEFINE_boolean("instrument", o.instrument, "Measure the step breakdown and write the "
                     "run_dir records; --noinstrument = fused steps only (benchmarks).")
    f.DEFINE_string("profile_steps", o.profile_steps,
                    "FIRST,LAST: capture a TF profiler trace of these steps into run_dir/profile.")
    f.DEFINE_boolean("horovod_timeline", o.horovod_timeline,
                     "horovod: write Horovod's timeline to run_dir/timeline.json.")
    f.DEFINE_string("progress", o.progress,
                    "auto, bar or lines. auto = a bar with ETA on an interactive terminal "
                    "(not under CI), plain lines otherwise.")
    f.DEFINE_float("baseline_samples_per_sec", o.baseline_samples_per_sec,
                   "One rank's samples/s for scaling efficiency; 0 = a stored 1-rank figure "
                   "of the same config, if any.")
    f.DEFINE_string("baseline_cache", o.baseline_cache,
                    "JSON file of stored 1-rank figures (read and written with --run_dir); "
                    "'' = off.")


def config_from_flags(fv) -> cfg.RunConfig:
    """fv: parsed absl FlagValues. Raises UsageError on bad values."""
    return cfg.RunConfig(
        model=fv.model,
        data=cfg.DataConfig(dataset=fv.dataset, data_dir=fv.data_dir,
                            batch_size=fv.batch_size, data_threads=fv.data_threads,
                            tfds_name=fv.tfds_name, train_split=fv.train_split,
                            eval_split=fv.eval_split, shuffle_buffer=fv.shuffle_buffer,
                            cache=fv.cache, skip_corrupt=fv.skip_corrupt,
                            verify_data=fv.verify_data, synthetic_shape=fv.synthetic_shape,
                            synthetic_examples=fv.synthetic_examples),
        optim=cfg.OptimConfig(optimizer=fv.optimizer, learning_rate=fv.learning_rate,
                              momentum=fv.momentum, warmup_epochs=fv.warmup_epochs,
                              scale_lr=fv.scale_lr),
        train=cfg.TrainConfig(epochs=fv.epochs, max_steps=fv.max_steps,
                              log_every=fv.log_every, eval_every_epochs=fv.eval_every_epochs,
                              eval_at_start=fv.eval_at_start,
                              checkpoint_dir=fv.checkpoint_dir,
                              checkpoint_every=fv.checkpoint_every,
                              keep_checkpoints=fv.keep_checkpoints),
        runtime=cfg.RuntimeConfig(backend=fv.backend, seed=fv.seed,
                                  intra_op_threads=fv.intra_op_threads,
                                  inter_op_threads=fv.inter_op_threads,
                                  deterministic=fv.deterministic,
                                  collective=fv.collective,
                                  collective_timeout_s=fv.collective_timeout_s,
                                  stop_grace_s=fv.stop_grace_s,
                                  mwms_port_base=fv.mwms_port_base,
                                  fusion_threshold_mb=fv.fusion_threshold_mb,
                                  cycle_time_ms=fv.cycle_time_ms,
                                  hierarchical_allreduce=fv.hierarchical_allreduce,
                                  elastic=fv.elastic,
                                  elastic_commit_every=fv.elastic_commit_every),
        speed=cfg.SpeedConfig(precision=fv.precision, grad_accum_steps=fv.grad_accum_steps,
                              gradient_checkpointing=fv.gradient_checkpointing,
                              compression=fv.compression,
                              max_nonfinite_steps=fv.max_nonfinite_steps,
                              inject_nonfinite=fv.inject_nonfinite,
                              jit_compile=fv.jit_compile),
        observe=cfg.ObserveConfig(run_dir=fv.run_dir, instrument=fv.instrument,
                                  profile_steps=fv.profile_steps, horovod_timeline=fv.horovod_timeline,
                                  progress=fv.progress,
                                  baseline_samples_per_sec=fv.baseline_samples_per_sec,
                                  baseline_cache=fv.baseline_cache),
        summary_json=fv.summary_json,
        export_weights=fv.export_weights,
    )
