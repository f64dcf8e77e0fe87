"""Analysis: run directories -> pandas frames -> metrics, figures and reports.

Reads run directories only (the stable interface); never imported by the engine.

    import analysis
    study = analysis.load("runs/studies/stragglers")   # a sweep folder, a run, or a list
    study.metrics, study.clients, study.summary         # tidy frames, swept values as columns
    analysis.metrics.compare(study, target=0.85)        # mean ± std over seeds per condition
    analysis.report.write(study)                        # report.html
"""
from . import metrics, plots, report  # noqa: F401
from .load import Study, load, load_run  # noqa: F401  (the public entry points)
