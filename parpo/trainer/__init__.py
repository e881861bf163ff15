"""The PARPO training loop (``loop``) on lightning_fabric: rollouts (``rollout``), per-component
metrics (``metrics``), the ``policy`` config group (``config``) and ``train_and_publish``
(``pipeline``). See docs/policy.md. Importing this package loads nothing heavy."""
