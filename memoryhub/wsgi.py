import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
application = get_wsgi_application()

# Import every view now (Django does it on the first request), then move the ~90k objects of start-up
# into the collector's permanent generation: a full collection scanning them took ~40 ms in the middle
# of a search (measured in the search benchmark's process), and they live as long as the process.
get_resolver().url_patterns
gc.freeze()
