package main

import "io"

// runServer serves MCP over stdio until stdin closes.
func runServer(stdin io.Reader, stdout, stderr io.Writer) int {
	return 0
}
