package main

// exitClientGone is the exit status when the client closed its end of
// stdout: the session ends like EOF (queued audit rows are written), but
// the answers since then were lost, so it is not a clean exit.
const exitClientGone = 3
