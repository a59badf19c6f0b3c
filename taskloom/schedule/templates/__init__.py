"""Schedule templates: hand-designed tensor programs for the anchor operators, each with a
schedule space read off the target. Post-scheduling fusion adds a group's prologues and
epilogues to them (:mod:`taskloom.schedule.post_fusion`)."""
