"""Process plumbing the sweeper starts: `probe` (what this machine offers, as JSON) and `zygote` (a
preloaded process that forks trials). That children die with their parent (`deathsig`) and where
their compile cache lives (`compile_cache`) are in the torch-free core.
"""
