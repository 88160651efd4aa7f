"""Who is never listed as a forgotten process: the rule, in one table.

A desktop's display server or compositor holds GPU memory for as long as someone is logged in,
and computes little: listing it as forgotten (``root Xorg 0.2 GiB``) sends people after the
wrong process. A tiny holder (a bare CUDA context, a monitoring tool) wastes too little to
name. ``gpu-exporter report`` leaves both out of its forgotten processes, and says so; their
memory still counts in the per-user figures (it was held).
"""

from __future__ import annotations

from typing import Final

from exporter.catalogue import thresholds

__all__ = ["DISPLAY_PROCESSES", "MIN_FORGOTTEN_BYTES", "display_matcher"]

#: Process names (the kernel's ``comm``, at most 15 characters, as the ``process`` label has
#: it) of display servers and compositors, and what each is.
DISPLAY_PROCESSES: Final[dict[str, str]] = {
    "Xorg": "the X server",
    "Xwayland": "X clients on a Wayland desktop",
    "gnome-shell": "GNOME's compositor",
    "X": "the X server (older distributions)",
    "mutter": "GNOME's window manager (alone)",
    "kwin_x11": "KDE's window manager on X",
    "kwin_wayland": "KDE's compositor on Wayland",
    "plasmashell": "KDE's desktop shell",
    "cinnamon": "Cinnamon's desktop",
    "xfwm4": "Xfce's window manager",
    "compiz": "the Compiz compositor",
    "sway": "the sway compositor",
    "Hyprland": "the Hyprland compositor",
    "weston": "the Weston compositor",
    "gamescope": "Valve's micro-compositor",
    "gdm-wayland-ses": "GDM's login screen session",
}
#: A process holding less than this is never a forgotten process: the idle floor the exporter
#: applies when it sums idle memory per user (``thresholds.IDLE_PROCESS_MEMORY_BYTES``).
MIN_FORGOTTEN_BYTES: Final = thresholds.IDLE_PROCESS_MEMORY_BYTES


def display_matcher() -> str:
    """A PromQL matcher on ``process`` that leaves the display processes out."""
    names = "|".join(sorted(DISPLAY_PROCESSES))
    return f'process!~"{names}"'
