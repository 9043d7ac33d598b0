// Package selftest holds the suite's tests of itself, apart from the driver (the root
// package, whose tests are the inventory's rows and nothing else, so that `make qualify`'s
// JUnit holds only the rows). Each test here builds on a run of the real driver: its test
// binary, built once by TestMain, run as a child against a mediaserve with a fault switched on
// (docs/FAULTS.md), against an endpoint that never answers, or interrupted with SIGINT, alone
// and under `make qualify`. The tests run in the module root, as the driver does.
package selftest
