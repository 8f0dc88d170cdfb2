# doctor app tests
