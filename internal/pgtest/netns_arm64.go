package pgtest

// sysSetns is setns(2)'s number on linux/arm64 (the syscall package does not list it).
const sysSetns = 268
