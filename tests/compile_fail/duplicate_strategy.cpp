#include "strata.hpp"
#ifdef STRATA_MUST_FAIL
strata::Trainer<strata::Mirrored<2>, strata::OneDevice> trainer;
#else
strata::Trainer<strata::Mirrored<2>> trainer;
#endif
int main() { return trainer.num_replicas_in_sync() == 2 ? 0 : 1; }
