# tune: search strategies, trial records, profiles, run-time parameter lookup.
