"""What ``whileai report`` reads and shows of runs: one run's pass rates, windows and grader figures (``runs``),
runs repeated over seeds as arms (``experiments``), and their figures (``plots``, the only module that imports
matplotlib). Reading and arithmetic only: the command line prints.
"""
