"""Every shared fixture comes from ``tests/plugins`` (see its ``__init__``)."""

pytest_plugins = [
    "tests.plugins.data",
    "tests.plugins.rewards",
    "tests.plugins.envs",
    "tests.plugins.policies",
    "tests.plugins.artefacts",
    "tests.plugins.llm",
]
