"""Adapters from sopgym's public env API to other libraries and to other hosts.

Each module imports its library only when it is used, so ``import sopgym`` still needs gymnasium and
numpy alone; nothing in ``envs``, ``sandboxes`` or ``trainers`` imports this package.

* :mod:`sopgym.integrations.trl`: TRL's ``GRPOTrainer``, both multi-turn paths
  (``environment_factory`` classes whose methods are the tools, and a ``rollout_func`` that keeps
  sopgym's full semantics in token space), plus ``train_dataset`` of task rows.
* :mod:`sopgym.integrations.skyrl`: a ``skyrl_gym`` ``BaseTextEnv`` per env id.
* :mod:`sopgym.integrations.verl`: ``SopgymAgentLoop``, a verl agent loop that runs a whole sopgym
  episode in token space through verl's ``server_manager.generate``.
* :mod:`sopgym.integrations.openenv_server`, :mod:`~sopgym.integrations.remote_env`: an OpenEnv
  server (``sopgym serve``) and a gymnasium env over such a server.

The library adapters run episodes through ``gymnasium.make`` and the env's public methods (``reset``,
``step``, ``end_episode``) only, and read what they report from the env's ``info`` and episode
record. See docs/integrations.md for what each library can and cannot express.
"""
