package main

func helper() { go func() {}() }
