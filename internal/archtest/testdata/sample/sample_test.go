package sample
