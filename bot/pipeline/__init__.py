"""Runs the engine on real inputs: the render session, the renderer and its memos, the use cases."""
