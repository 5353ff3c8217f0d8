"""The environment through which a launcher tells a launched process where its part of the run goes and
how to record it: read by perfkit's own worker, ``perfkit.record`` and the start-up hook (which must not
import more than this before the script imports TensorFlow)."""

RUN_DIR_VAR = "PERFKIT_RUN_DIR"
INDEX_VAR = "PERFKIT_WORKER_INDEX"
AUTO_VAR = "PERFKIT_AUTO_RECORD"  # "1": record through the start-up hook (perfkit launch, unless --no-auto-record)
STEP_FUNCTION_VAR = "PERFKIT_STEP_FUNCTION"  # --step-function NAME
