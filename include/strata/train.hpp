#pragma once
// Trainer, callbacks, logs.

#include "strata/train/backup_and_restore.hpp"
#include "strata/train/callback.hpp"
#include "strata/train/csv_logger.hpp"
#include "strata/train/early_stopping.hpp"
#include "strata/train/evaluator.hpp"
#include "strata/train/gradient_sync.hpp"
#include "strata/train/logs.hpp"
#include "strata/train/loss_scale.hpp"
#include "strata/train/model_checkpoint.hpp"
#include "strata/train/monitor.hpp"
#include "strata/train/progress_bar.hpp"
#include "strata/train/replica_pass.hpp"
#include "strata/train/sidecar_evaluator.hpp"
#include "strata/train/slice_update.hpp"
#include "strata/train/step_runner.hpp"
#include "strata/train/trainer.hpp"
