"""The welfare a central planner with hindsight could reach on a scenario's realised workload:
a linear program over slots x tenants x pools, solved with HiGHS, twice (GPUs movable between
tenants, and holdings kept per tenant); their difference is what trading could add."""
