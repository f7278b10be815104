"""In-process Symphony + Bounded Flood simulator."""
