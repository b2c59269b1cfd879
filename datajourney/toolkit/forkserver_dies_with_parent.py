"""Imported by multiprocessing's fork server as it starts (:data:`datajourney.toolkit.lifetime.FORKSERVER_PRELOAD`):
the server gets SIGKILL when the process that started it dies, and every worker it forks dies with the server,
so no worker outlives a killed kernel."""
from datajourney.toolkit.lifetime import children_die_with_this_process, die_with_parent

die_with_parent()
children_die_with_this_process()
