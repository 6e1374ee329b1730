"""Process set-up of mp_prefetch workers: starting them, closing them at exit, shared-memory batch slots."""
