"""Every operator taskloom knows, as functions over tensors (numpy/torch-style arguments).

Applied to concrete tensors, an operator compiles (once per pattern of shapes, cached) and
runs at once, like numpy: ``taskloom.ops.relu(taskloom.asarray(x)).numpy()``.
"""
from taskloom.ops.elementwise import *  # noqa: F401,F403
from taskloom.ops.nn import *  # noqa: F401,F403
from taskloom.ops.reduce import *  # noqa: F401,F403
from taskloom.ops.transform import *  # noqa: F401,F403
from taskloom.ops.indexing import *  # noqa: F401,F403
from taskloom.ops.attention import *  # noqa: F401,F403
from taskloom.ops import operators as _operators  # noqa: F401  (installs Tensor's operators)
