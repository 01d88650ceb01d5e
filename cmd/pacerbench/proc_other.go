//go:build !linux

package main

import "syscall"

// sysProcAttr: elsewhere, a redis-server outlives a program that dies
// without stopping it.
func sysProcAttr() *syscall.SysProcAttr { return nil }
