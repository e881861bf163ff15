"""The agent environment: typed actions, catalogue search, tasks, reward components, baselines.

See docs/env.md. ``EnvSource.load(data_dir, registry)`` opens what an environment reads;
``BatchEnv`` steps many episodes at once; ``Environment`` is the one-episode view.
"""

from parpo.env.catalogue import Catalogue
from parpo.env.config import TASK_COMPONENTS, EnvConfig
from parpo.env.environment import COMPONENTS, BatchEnv, Environment, PreferenceTransform
from parpo.env.observation import Call, Observation
from parpo.env.schema import (
    ACTION_SCHEMA_VERSION,
    Action,
    ActionError,
    Constraints,
    Filter,
    Recommend,
    Request,
    Search,
    action_json_schema,
    parse_action,
)
from parpo.env.source import EnvSource
from parpo.env.tasks import Task, make_tasks

__all__ = [
    "ACTION_SCHEMA_VERSION",
    "COMPONENTS",
    "TASK_COMPONENTS",
    "Action",
    "ActionError",
    "BatchEnv",
    "Call",
    "Catalogue",
    "Constraints",
    "EnvConfig",
    "EnvSource",
    "Environment",
    "Filter",
    "Observation",
    "PreferenceTransform",
    "Recommend",
    "Request",
    "Search",
    "Task",
    "action_json_schema",
    "make_tasks",
    "parse_action",
]
