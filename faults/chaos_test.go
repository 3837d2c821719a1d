package faults_test

func runChaosWorker() int { return 0 }
