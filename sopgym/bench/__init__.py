"""Running a benchmark: suite runs (:mod:`.suite`), their pre-flight (:mod:`.preflight`), rescoring a
finished run (:mod:`.rescore`) and the library side of ``sopgym eval`` (:mod:`.eval_command`,
:mod:`.tables`).

It sits on top of the episode layer (:mod:`sopgym.episodes`, which runs the episodes) and the evaluator
(:mod:`sopgym.evaluation`, which scores them); neither imports it. Import its modules by name: this
``__init__`` imports nothing, so ``import sopgym.bench.tables`` loads no episode code.
"""
