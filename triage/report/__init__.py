"""The assemble stage: the diagnoses and their inputs in; the Report out (assemble.py), with its fleet view
(fleet.py), command line (command.py), runbook link (runbooks.py) and charts (timeline.py). Renderers are in
render/; diff.py compares two Reports for `vtriage diff`."""
