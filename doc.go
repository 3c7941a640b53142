// Crosstalk-mcp is a Model Context Protocol server that lets separate AI
// agents talk in groups. This comment is the reader's map: where one request
// goes, every goroutine, the timing constants and every environment
// variable. README.md is for users; docs/architecture.md lists every file.
//
// # Layers
//
// Files share the prefix of the spine file whose concern they extend (main,
// jsonrpc, tools, store, routing, observe, audit). TestLayers (doc_test.go)
// holds the rules between them, with no exceptions: the store names no other
// layer but routing.go's pure decision; routing names no jsonrpc; the
// dashboard names no jsonrpc or main; audit names no observe; nothing outside
// main names main. The foundations every layer uses live in the store: the
// Python emulations of stored values in store_python.go, logf in
// store_doctor.go, mapSlice and setOf in store_sqlite.go.
//
// # One stdio send_message, as it runs by default
//
//  1. main.go run → runStdio → jsonrpc_session.go serve reads
//     a line and offers it to pipelinedSends (jsonrpc_groupcommit.go), which
//     checks it with prepareCall and parseSend (tools_messages.go) and lets
//     sends to the same group already buffered join the run (up to 64).
//  2. storeSends calls store.sendMessages (store_sendbatch.go) once for the
//     run, with one 3 s busy window (an HTTP send's, its request's): withHandle
//     → acquire (store.go) → groupHandle.sendQueued, the handle's in-process
//     queue → storeQueued → writeLocked: BEGIN IMMEDIATE, tried every
//     millisecond while another process writes, a look that the group's file is
//     still there, sendBatch.write (membership, route in routing.go, rows, wake
//     events, revisions), a last look at each send's context, COMMIT. A line of
//     16 MiB or more runs alone, holding nothing of its line (detach).
//  3. sentObject renders the answer and tool.result (tools.go) wraps it;
//     finishCall hands the call to the audit log (audit.go, when enabled) and
//     lineWriter writes one pyJSON (store_python.go) line.
//  4. In another session's process the commit's -wal write raises an event on
//     the directory's inotify watch (routing_watch_linux.go; kqueue's watch of
//     the -wal file in routing_watch_bsd.go): changeWatcher.changed settles the
//     group and publishes it; the poller (routing_subscriptions.go) checks it:
//     groupSignature (store_signature.go) skips unchanged files, dueWakeup
//     (store_messages.go) finds the wake event (a delivery, store_delivery.go),
//     notify writes notifications/resources/updated (with channels on,
//     pushChannel in routing_channels.go pushes the text), markWakeupNotified
//     records it.
//
// That path runs through main.go, jsonrpc.go, jsonrpc_session.go,
// jsonrpc_groupcommit.go, tools.go, tools_messages.go, store.go,
// store_sqlite.go, store_python.go, store_sendbatch.go, store_messages.go,
// store_signature.go, routing.go, routing_watch.go, routing_watch_linux.go
// and routing_subscriptions.go.
// TestSendTrace plays it with a coverage build and holds this list to the
// files whose functions run for the send; the functions that run are about
// 1,760 of these files' 3,489 lines.
//
// # One HTTP request
//
// httpGuard (jsonrpc_http_security.go: token, Origin, Host; per-agent tokens
// from the tokens file) → httpTransport.ServeHTTP (jsonrpc_http.go) → post
// (body limit) → the session's handleLine, the same session code
// as stdio without the read-ahead, its context the request's; its sends meet
// other sessions' sends of this process in the group handle's queue (step 2
// above) and share their commit. prepareCall refuses a context_id the
// session's token may not speak for. An answer ready at once is the POST's
// JSON body; later ones and notifications leave through the session's router
// (jsonrpc_http_session.go) on the request's SSE stream or the GET stream.
//
// # Goroutines
//
// Each is started by the owner named here and joined by that owner's close
// or shutdown, except where said.
//
//	goroutine                    started by                     stopped and joined by
//	stdio read loop              runStdio (main.go)             stdin EOF; on a signal it is left in its read or in a write nobody reads (after 4 s), neither interruptible, once in-flight requests are joined
//	wait payload read            parseWaitOptions (main_wait.go) stdin EOF; past the --timeout it is left in its read, and the process exits
//	HTTP server                  runHTTPServer (main_serve.go)  http.Server.Shutdown, 5 s
//	HTTP idle-session janitor    newHTTPTransport (every)       transport close (context, WaitGroup)
//	SSE cut-off (AfterFunc)      httpTransport.stream           the exchange's end; joined before stream returns
//	in-flight request            inflight.start                 the request's context; inflight.close (serve's end, or a signal: joined for at most 1 s)
//	subscription poller          newSubscriptions               subscriptions.close (context, WaitGroup; a helper joins it for at most 1 s, as a blocked stdout write cannot be cancelled)
//	bounded join                 joinWithin (routing_subscriptions.go) its join's end; past its bound it is left to end on its own (a write nobody reads)
//	watch probe release          newChangeWatcher               changeWatcher.close (WaitGroup)
//	settle timers (AfterFunc)    changeWatcher.changed          stopped by the watch's stop; joined by changeWatcher.close (WaitGroup)
//	inotify or kqueue reader     watchDirectory, for the first subscription naming a group  the last one leaves (RmWatch, WaitGroup)
//	tokens-file watcher          httpTransport.followTokens     transport close (context, WaitGroup)
//	membership readers           store.memberships (store_read.go) the directory's last group read; joined before it returns
//	audit writer                 openAuditLog (audit.go)        auditLog.close: the queue closed, it drains it and ends (WaitGroup)
//	dashboard server, poller     observer.serve (observe.go)    its context; Shutdown, 2 s
//	browser opener               observeCommand.run             the dashboard's context (WaitGroup)
//	demo trickle                 startObserveDemo               the demo's context; the child is waited on, killed after 5 s (WaitDelay)
//	demo stuck timer (AfterFunc) observeDemo.request            stopped by the answer; firing, it ends the demo session
//
// # Timing constants, each with its reason
//
//	busy_timeout 100 ms        store_sqlite.go     SQLite's busy handler is unfair between processes; retry instead
//	busyRetryWindow 3 s        store_sqlite.go     then answer sqlite_busy; backoff 25 ms doubling to 400 ms, jittered
//	writeLockWait 250 ms       store.go            BEGIN IMMEDIATE tried every 1 ms, as SQLite's busy handler sleeps while the lock sits free; longer means the holder is stuck
//	watchQuietPeriod 3 ms, watchRecheck 30, 150 ms routing_watch.go a commit writes the -wal several times: announce once, and again for its last writes, which can land after that
//	watchCoalesce 2 ms, watchCoalesceMax 16 ms routing_watch.go events of many groups read in one batch under load
//	watchSafetyPoll 2 s        routing_subscriptions.go a missed event (network filesystem, overflow) costs at most this
//	wakeupRenotifyGap 1 s      routing_subscriptions.go one notification a second per member while it does not read
//	defaultPollInterval 0.5 s  routing_subscribe.go the original's poll, where there are no file events
//	signatureSettle 200 ms, signatureSettleCoarse 3 s store_signature.go a file's mtime is coarse; recheck until it has settled
//	wakeupReminderInterval 300 s store_messages.go  an unacknowledged wake event is notified again
//	acknowledgedWakeupRetention 7 d store_read.go the original's: acknowledged wake events are purged after it
//	defaultWaitSeconds 25, maxWaitSeconds 50 tools_wait.go the empty answer arrives before clients' 60 s request timeout
//	defaultWaitKeepalive 10 s  tools_wait.go       wait_for_messages sends progress so clients keep the call open
//	defaultWaitTimeout 55 min  main_wait.go        a little before the hour hooks install lets Claude Code run it
//	waitGrace 0.5 s            main_wait.go        fresh mail is left to the session's own tool or hook first
//	livenessPoll 1 s           main_wait.go        a waiter ends within a second of its client or a newer waiter
//	clientEndReach 10 s        main_wait.go        a waiter Claude Code starts as it closes its stdio server still ends with it
//	auditLinger 100 ms         audit.go            audit rows are written in batches: the original waits 100 ms for the lock
//	auditLog.lockWait 3 s      audit.go            busyRetryWindow, BEGIN tried every 1 ms as for writeLockWait: many servers audit at once; 250 ms while opening; one try after a failed batch, so a stuck lock delays exit once
//	sessionIdle 30 min         jsonrpc_http_security.go an HTTP session nobody uses is closed
//	sessionReclaim 1 min       jsonrpc_http_security.go at a bound, spares sessions just opened, which a burst of new clients would end unused; hence the 429's Retry-After 60 s (10 s at the stream bound, jsonrpc_http.go)
//	writeTimeout 30 s          jsonrpc_http_security.go a client that stops reading is cut off, not waited on
//	keepAlive 15 s             jsonrpc_http_security.go, observe_events.go a comment on quiet event streams keeps proxies from closing them
//	IdleTimeout 2 min          main_serve.go       an idle keep-alive connection holds a descriptor
//	ReadHeaderTimeout 10 s     main_serve.go, observe.go slowloris clients cannot hold connections
//	observePollInterval 0.5 s  observe.go          the original dashboard's refresh; idle groups cost two stats
//	retiredHandleGrace 1 min   observe_readonly.go a replaced read-only handle may still be read
//	ConnMaxIdleTime 10 s       observe_readonly.go no group file stays open between the dashboard's looks
//	checkGroupFile 5 s         store_doctor.go     a check of a damaged file never hangs the dashboard or doctor
//	demoTrickleInterval 4 s    observe_demo.go     the live view visibly moves without flooding the chat
//	demoTimeout 30 s           observe_demo.go     a demo tool call slower than this means its child is stuck
//	auditCleanupBatchSize 250  audit_rollup.go     rows per retention transaction: the original's audit writers wait 100 ms for its lock
//	audit cleanup 24 h         audit_rollup.go     retention deletes run at most once a day by any process (metadata records it)
//	tokensPoll 2 s             jsonrpc_http_security.go an edited tokens file applies within it; a read costs microseconds
//	doctorGracePeriod 1 min    store_doctor.go     a file changed that recently may still be being created
//	ttlMs 1 h                  jsonrpc_dispatch.go 2026-07-28 clients may cache tools, templates and server/discover, which only a new binary changes
//	hook timeout 10 s, 1 h     routing_hooks_install.go what hooks install grants: a hook answers in milliseconds, so this bounds a stuck one's hold on its client; the waiter's outlasts its 55 min
//
// # Environment variables
//
//	CROSSTALK_GROUPS_DIR                   where the group databases live (default ~/.cache/crosstalk)
//	CROSSTALK_POLL_INTERVAL_SECONDS        the poll interval without file events (default 0.5)
//	CROSSTALK_FILE_EVENTS                  0 turns file-system events off
//	CROSSTALK_OBSERVABILITY_RETENTION_DAYS turns the audit log on, keeping that many days
//	CROSSTALK_MAX_MESSAGE_BYTES            the largest message accepted
//	CROSSTALK_HTTP_TOKEN                   the bearer token of serve --http (or --token-file)
//	CROSSTALK_ALLOW_NETWORK_FS             1 silences the network-filesystem warning
//	CROSSTALK_CHANNELS                     1 pushes due wakeups to Claude Code as channel events
//	CROSSTALK_CONTEXT_ID                   the member a hook or wait command acts for; pins a stdio server to it
//	CLAUDE_CONFIG_DIR                      Claude Code's settings directory (CODEX_HOME: Codex's), where hooks install writes
//	CLAUDE_PID                             set by Claude Code: the client whose exit ends a wait (else the parent)
//	CLAUDE_CODE_SESSION_ATTENDED           set by Claude Code: 0 (with no _KIND) is a headless run, where wait exits at once
//	CLAUDE_CODE_SESSION_KIND               set by Claude Code for its background sessions, which are unattended yet interactive
//	GOMEMLIMIT                             Go's; observe sets its 40 MiB soft memory limit only when this is unset
package main
