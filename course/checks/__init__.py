"""One module of exercise checks per notebook: ``from course.checks import nb02 as check``.

Each check compares the student's code with an independent reference (a PyTorch built-in,
the paper's formula, a property such as causality), never with the course's own solution.
"""
