#!/usr/bin/env python3
"""Event protobufs as TensorFlow serializes them, for event_writer_test.

Needs TensorFlow (`pip install tensorflow-cpu`). Run from the repository root:

    python3 scripts/golden/event_records.py

prints, in hex, `tensorflow.Event` records without their wall_time (field 1,
which the writer takes from the clock): the SessionLog START that a run's
event file begins with at the step it (re)starts from. The test
(tests/trainer/logging/event_writer_test.cc,
SessionStartIsTensorFlowsSessionLogStart) compares the writer's record after
its wall_time with these bytes.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tensorflow.core.util import event_pb2  # noqa: E402

start = event_pb2.Event(
    step=301,
    session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
print("session_start_301", start.SerializeToString().hex())
