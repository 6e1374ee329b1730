"""Private helpers that describe audiotree's on-disk layouts (shared by writers and readers)."""
