"""The decide stage: facts in; the rule walk's diagnosis out (pure: no I/O). incident.py decides every attempt
and every diagnosis of the incident; engine.py walks the rules ruleset.py loads."""
