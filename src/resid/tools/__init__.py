"""The tools layer: the interpretability methods and behaviours the chapters study, each a module
(attribution, lrp, lenses, patching, circuits, das, heads, neurons, dimensions, function_vectors,
tda, behaviours, tasks, plans, lm_eval_adapter). They read models through ``resid.model``,
training through ``resid.train`` and statistics through ``resid.stats``; nothing below imports them.
"""
