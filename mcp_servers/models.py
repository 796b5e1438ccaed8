"""Models for this app arrive with their issue (see DESIGN.md section 1)."""
