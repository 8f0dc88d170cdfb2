# bench app tests
