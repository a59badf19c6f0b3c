"""The tensor-program IR: types, expressions, statements, functions, modules and task mappings."""
from taskloom.ir.dtypes import (DataType, PointerType, TensorType, Type, VectorType, bf16, bfloat16,
                                boolean, dtype, f16, f32, f32x4, f32x8, f32x16, f64, float16, float32,
                                float64, i8, i16, i32, i64, index_type, int8, int16, int32, int64, ptr,
                                u8, uint8, vec)
from taskloom.ir.expr import (Binary, Broadcast, Call, Cast, Constant, Expr, IndexCheck, Select, TensorElement,
                              Unary, Var, VectorLoad, as_expr, broadcast, call, cast, cdiv, const, eq,
                              free_vars, index_check, is_const, logical_and, logical_not, logical_or, maximum,
                              minimum, ne, select, var, vload)
from taskloom.ir.functor import Rewriter, Visitor, collect, substitute
from taskloom.ir.mapping import (Composed, Custom, MappingIter, Repeat, Spatial, TaskMapping, custom,
                                 repeat, spatial)
from taskloom.ir.node import Node
from taskloom.ir.printer import astext
from taskloom.ir.stmt import (Assign, Barrier, BufferStore, Comment, Declare, Evaluate, For,
                              ForMapping, Function, If, Let, Module, Prefetch, SeqStmt, Stmt, VectorStore,
                              prefetch, seq, store, vstore)
