"""The built-in apply steps, written against the same interface a user's step gets
(:mod:`oncebox.engine.step`): each keeps its tables' migrations and its statements, per
backend, in ``sql/<dialect>/`` beside it."""
