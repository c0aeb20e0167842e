"""One module per trigger or command; each turns an event into the desired GitHub state."""
