"""The landing page: an HTML template (``index.html``, ``style.css``) and its renderer."""
