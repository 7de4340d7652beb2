#pragma once
// strata: data-parallel training where strategy, device, precision and accumulation are
// compile-time policy types. This umbrella header includes every layer and brings the
// user-facing names into namespace strata.

#include "strata/comm.hpp"
#include "strata/core.hpp"
#include "strata/data.hpp"
#include "strata/io.hpp"
#include "strata/nn.hpp"
#include "strata/optim.hpp"
#include "strata/policy.hpp"
#include "strata/profile.hpp"
#include "strata/strategy.hpp"
#include "strata/train.hpp"

namespace strata {

// Policies
using policy::BucketBytes;
using policy::CentralStorage;
using policy::Compress;
using policy::NoCompression;
using policy::Cpu;
using policy::Cuda;
using policy::BasicDynamicLossScale;
using policy::DynamicLossScale;
using policy::FullPrecision;
using policy::GradAccum;
using policy::Mirrored;
using policy::MixedPrecision;
using policy::MixedPrecisionFp16;
using policy::MultiWorkerMirrored;
using policy::NoLossScale;
using policy::OneDevice;
using policy::ParameterServer;
using policy::Precision;
using policy::StaticLossScale;

template <class... Policies>
using Trainer = train::BasicTrainer<policy::Config<Policies...>>;
template <class... Policies>
using Strategy = strategy::BasicStrategy<policy::Config<Policies...>>;

// Models
using nn::Accuracy;
using nn::AveragePooling2D;
using nn::Bert;
using nn::BertOptions;
using nn::BertPooler;
using nn::Conv2D;
using nn::Dense;
using nn::Dropout;
using nn::Embedding;
using nn::Gelu;
using nn::GlobalAveragePooling2D;
using nn::GlorotUniform;
using nn::HeUniform;
using nn::ImageShape;
using nn::LayerNorm;
using nn::MaxPool2D;
using nn::MeanSquaredError;
using nn::Padding;
using nn::Relu;
using nn::Residual;
using nn::Sequential;
using nn::SelfAttention;
using nn::SoftmaxCrossEntropy;
using nn::Tanh;

// Optimizers
using optim::Adam;
using optim::AdamW;
using optim::ConstantSchedule;
using optim::CosineDecay;
using optim::Lamb;
using optim::linear_scaling;
using optim::scheduled;
using optim::Sgd;
using optim::StepDecay;
using optim::StepInfo;
using optim::WarmupLinearDecay;

// Custom loops
using comm::ReduceOp;
using strategy::DistributedBatch;
using strategy::PerReplica;
using strategy::ReplicaContext;
using strategy::Shard;
using strategy::StrategyOptions;
// Input each worker reads for itself
using strategy::files_for_worker;
using strategy::InputContext;
using strategy::PerWorker;

// Training
using train::BackupAndRestore;
using train::BatchLogs;
using train::CheckpointEvaluation;
using train::CsvLogger;
using train::EarlyStopping;
using train::EpochLogs;
using train::Evaluation;
using train::FitOptions;
using train::History;
using train::LossScaleState;
using train::ModelCheckpoint;
using profile::LoopProfiler;
using profile::Profiler;
using profile::ProfilerOptions;
using profile::TraceWriter;
using train::MonitorMode;
using train::ProgressBar;
using train::SidecarEvaluator;
using train::SidecarReport;
using train::SidecarStop;
using train::TrainBegin;

// Checkpoints
using io::CheckpointManager;
using io::load_checkpoint;
using io::Progress;
using io::save_checkpoint;
using io::training_state;
using io::TrainingState;

// Data
using data::Batch;
using data::BatchedDataset;
using data::Dataset;

}  // namespace strata
