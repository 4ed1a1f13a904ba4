"""The matrix orchestration: the controller that steps Locust through the planned cells, and the capacity twin that predicts in virtual time."""
