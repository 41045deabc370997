// Command worker does work a command must not do, one mark of each kind, for CheckCommands.
package main

import (
	"flag"
	h "net/http"
)

var ch = make(chan int, 1)

func main() {
	port := flag.String("listen", ":8080", "address")
	flag.StringVar(port, "addr", ":8080", "flag definitions are not counted")
	flag.Parse()
	done := make(chan error)
	go func() { done <- h.ListenAndServe(*port, nil) }()
	select {
	case <-done:
	}
	ch <- 1
}

func long() int {
	x := 0
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	x++
	return x
}
