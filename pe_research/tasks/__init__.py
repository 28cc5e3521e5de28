"""Length-controlled seq2seq tasks: the Chomsky-hierarchy suite, copy/sort/addition, SCAN, text."""

from pe_research.tasks.base import Examples, Task
from pe_research.tasks.registry import (
    BENCHMARK_TASKS,
    GENERATED_TASKS,
    TASKS,
    default_task_config,
    get_task,
    task_class,
)
from pe_research.tasks.vocabulary import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    VOCABULARY_FILE,
    Vocabulary,
)

__all__ = [
    "BENCHMARK_TASKS", "BOS_ID", "EOS_ID", "Examples", "GENERATED_TASKS", "PAD_ID", "TASKS",
    "Task", "VOCABULARY_FILE", "Vocabulary", "default_task_config", "get_task", "task_class",
]
