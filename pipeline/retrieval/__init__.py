"""The search core and what runs it in process: the Searcher, response bodies, evaluation and hybrid tuning."""
