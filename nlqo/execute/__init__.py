"""Physical plans and their execution: the TSSS linear template and the PlanRAG parallel tree."""
